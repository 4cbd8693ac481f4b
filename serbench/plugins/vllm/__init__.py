"""serbench's vLLM plugin: vLLM's own codec (backend ``vllm``) and message types
(``images-N:layout=vllm-native``), measured by every scenario (docs/vllm.md).

Registered through entry points (``serbench.serializers``, ``serbench.layouts``),
so nothing below this package imports it; it imports vLLM only through
``serbench.plugins.vllm.adapter``, the one module that knows how vLLM's releases differ.
Without vLLM importable, naming either is one line saying what to install (exit 2).
"""
