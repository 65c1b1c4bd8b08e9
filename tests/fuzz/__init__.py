"""Protocol fuzzing (issue 17): schema-driven request generators, byte-level mutations,
record-batch fuzzing and a runner that sends them to real broker processes.

* :mod:`tests.fuzz.wire` writes Kafka primitives, including the values kio's writers refuse
  (lengths and counts that lie, nulls where the schema forbids them, overlong varints).
* :mod:`tests.fuzz.schema` reads kio's request dataclasses into a small field tree.
* :mod:`tests.fuzz.strategies` turns that tree into request frames; one generator serves two
  sources of choices: ``random.Random`` (the long run, fast) and Hypothesis (the seed-fixed
  property tests, which shrink).
* :mod:`tests.fuzz.batches` builds Produce payloads with hostile record batches.
* :mod:`tests.fuzz.mutations` mutates valid frames byte by byte.
* :mod:`tests.fuzz.runner` sends them over several pipelined connections and checks the
  invariants; :mod:`tests.fuzz.logcheck` verifies every batch on disk afterwards.
"""
