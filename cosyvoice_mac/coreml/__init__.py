"""Core ML vocoder: convert HiFT to ``.mlpackage`` files, run them on a Mac, fall back to torch elsewhere.

Modules: :mod:`.rewrite` (convertible torch graphs), :mod:`.host` (numpy source and iSTFT
normalisation), :mod:`.split` (the split vocoder over any graph backend), :mod:`.convert`
(coremltools conversion and the package manifest), :mod:`.runtime` (``CoreMLVocoder``,
``load_vocoder``); its command line is ``cosyvoice_mac.cli.coreml`` (``cosyvoice-mac coreml convert``). coremltools is
imported only where it is needed, so everything but conversion and Core ML runs without it.
"""
