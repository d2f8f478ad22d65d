"""The beacon's core: configuration, query model, answer engine and the privacy ledger."""
