"""Pure decisions of the operator: values in, typed results with reasons out. No I/O, no clocks
(``now`` is a parameter), no randomness, no logging."""
