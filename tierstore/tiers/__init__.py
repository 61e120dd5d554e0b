"""The three tiers (hot, warm, cold), the cold tier's archive format and search index, and the migrator that
moves memories between them."""
