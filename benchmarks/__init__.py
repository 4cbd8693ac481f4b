"""asv suites: thin wrappers over serbench's scenarios (DESIGN §2); see docs/asv.md."""
