"""serbench: benchmark and regression harness for frontend↔engine serializers."""

__version__ = "0.1.0"
