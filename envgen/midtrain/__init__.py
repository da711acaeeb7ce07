"""Mid-training and cold-start trajectories (LongCat-Flash-Thinking-2601 section 2, "Hybrid Data Synthesis", and
section 3.1.2, "Cold-Start Policy Initialization"), as pure procedures over the environment runtime.

- ``records``: the trajectory row, turn-level masks, tool-call validation and the verifiers that re-check a row
  on its own (execution replay, schema conformance, two-way answer + reasoning completeness);
- ``synth``: environment-grounded synthesis (chains sampled on an environment, reverse-synthesized request and
  profile, played through the runtime with the profile-grounded user, kept only when the rubric passes);
- ``augment``: tool decomposition, reasoning decomposition (alternative candidates) and planning augmentation;
- ``text``: text-driven synthesis (procedural how-to text -> tool schemas and call lists -> trajectories);
- ``longctx``: KeyChain and multi-hop QA trajectories that state every condition they verify;
- ``compress``: step compression of long horizons.

The texts a teacher may rewrite are ``Slot`` s: each carries the reference text (the offline default, written from
the graph) and the values a rewrite must keep verbatim, so a teacher's words never break verification.
"""
