"""The BBHnet search's own science: injection sets and their formats (this project's HDF5,
aframe's, LIGO_LW), the population they are drawn from, waveforms and their projection, the
draw above an SNR cut, and injections added on the fly with the foreground they make. ``data/``
keeps what every mode reads (frames, discovery, segments, preflight, synthetic data)."""
