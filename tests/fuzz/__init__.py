"""Tessera's fuzzing harness: seeded mutations of the examples, the lit inputs and the PTX test kernels,
random sizes and flags, and random arguments to the public Python API, each run in-process by the tool a user
would call, in worker processes with a per-case time limit, and classified.

- `mutate`: the text mutations (MLIR and PTX);
- `cases`: the seeded case generators (`generate(seed, count)`);
- `harness`: running cases and classifying their outcomes (`run_cases`, `Summary`).

A bounded slice runs in the test suite (tests/test_fuzz.py); the campaign is `python bench/fuzz.py`.
"""
