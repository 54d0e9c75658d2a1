"""Model files, one job a module:

* :mod:`.metadata`: what every file records (the ``tm2nn.*`` metadata, the weights' hash,
  a trained net's tensors);
* :mod:`.formats`: the files written (``.onnx``, ``.pt``, and ``.safetensors`` through
  :mod:`.manifest`);
* :mod:`.manifest`: the ``.safetensors`` format and its JSON manifest;
* :mod:`.schema`: the metadata's schema and the checks of a file against the construction;
* :mod:`.load`: a file read back, checked, into a model (through the backend registry).

The package sits above the backends and below the handle (:mod:`tm2nn.handle`): it reads
and writes :class:`~tm2nn.backends.protocol.Model` values.
"""
