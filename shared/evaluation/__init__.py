"""Recall evaluations on the workspace's own knowledge (issue 34, ``docs/evaluation.md``):
the cases (:mod:`~shared.evaluation.cases`), a run (:mod:`~shared.evaluation.run`), its
figures and the paired comparison with the run before (:mod:`~shared.evaluation.figures`), and
when the worker runs one by itself (:mod:`~shared.evaluation.schedule`)."""
