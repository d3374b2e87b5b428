"""Verified recall: the flow, rank fusion, link expansion, and what makes a card eligible.

``verified.py`` (the flow), ``fusion.py``, ``expansion.py``, ``eligibility.py``.
"""
