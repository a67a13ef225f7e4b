"""The decision core: the ledger, the run tree, a call's life, tools, approvals, wrap-up, prices."""
