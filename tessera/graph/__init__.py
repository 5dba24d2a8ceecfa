"""The StableHLO graph rewriter: read a JAX-exported StableHLO module, find the attention it computes (forward
and backward), replace it by calls to Tessera's kernels, and run the rewritten graph.

- `attention_match`, `match_attention_fwd`, `match_attention_bwd`: the pattern and its matchers;
- `graph_edit`: the edits a match needs (inlining JAX's helper calls, folding transposes, removing dead ops);
- `remat`: `jax.checkpoint`'s recompute, read from `optimization_barrier`, merged with the forward it repeats for
  matching, and put back after the rewrite;
- `rewrite_report`: what was rewritten and what was refused, with reasons;
- `stablehlo_interpreter`: StableHLO semantics on NumPy (the reference the rewritten graph is checked against);
- `graph_runtime`: runs a rewritten graph, the attention calls in the Tile IR interpreter.

The pass is `tessera.passes.rewrite_attention`; `tessera-run` runs a graph (`tessera.tools.tessera_run_graph`).
"""
