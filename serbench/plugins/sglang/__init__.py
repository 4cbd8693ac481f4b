"""serbench's SGLang plugin: SGLang's own codec paths (backends ``sglang``, ``sglang-pickle``), a
what-if of them with tensors out of band (``sglang-oob``) and its message types (``text-sonnet``
and ``images-N`` with ``layout=sglang-native``), docs/sglang.md.

Registered through entry points (``serbench.serializers``, ``serbench.layouts``), so nothing below
this package imports it; it imports SGLang only through ``serbench.plugins.sglang.adapter``.
Without SGLang importable, naming any of them is one line saying what to install (exit 2).
"""
