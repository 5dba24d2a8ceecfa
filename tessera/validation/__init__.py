"""Per-level validation: every pass of a pipeline checked by running the kernel before and after it, and
per-tile intermediates of attention compared with a NumPy golden. The public entry point is
`tessera.validate` (`validate`, `attention_trace`, `golden_attention_trace`, `compare_traces`).

- `levels`: run a kernel at the level a module is at (Tile IR, Target IR, PTX) on generated inputs;
- `recording`: interpreter listeners that record one block's named values in tile coordinates;
- `compare`: output and per-op comparison rules, the first diverging op;
- `pipeline`: the pass-by-pass walk and its report;
- `trace`: the online-softmax state per K/V tile (running max, sum, rescale factor, partial output).
"""
