"""Bridges from other libraries to the tk_ops kernels. Each lives in its own module and imports its library only when
that module is imported, so ``import tk_ops.integrations`` needs none of them:

    from tk_ops.integrations import transformers as tk_transformers   # Hugging Face transformers (imports it)
    tk_transformers.register()                                         # attn_implementation="tk_ops"
"""
