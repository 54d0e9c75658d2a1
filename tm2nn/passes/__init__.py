"""IR -> IR lowerings (layering, and later stay-move removal, 1D -> 2D, TM -> circuit unrolling)."""
