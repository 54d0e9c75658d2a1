"""IR -> IR lowerings: layering, stay-move removal, TM -> circuit unrolling, and the RCNN
machine form (binarisation, 1D -> 2D, the B.1.2 normal form; see rcnn_form.py)."""
