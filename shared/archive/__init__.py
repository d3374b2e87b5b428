"""The archive's use cases: card administration, activity records, browsing for the explorer."""
