"""DeepClean's files that the server runs by path (``BuiltInParts.streamed``'s ``runner``):
``export`` copies each beside ``repository/backend/layer_stream.py`` in the fused model."""
