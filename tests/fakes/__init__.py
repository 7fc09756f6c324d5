"""Small but real stand-ins for model files we cannot ship in tests (ONNX tokenizer, CAM++)."""
