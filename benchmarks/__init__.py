"""asv suites: thin wrappers over serbench's scenarios (docs/architecture.md, "Layers"); see docs/asv.md."""
