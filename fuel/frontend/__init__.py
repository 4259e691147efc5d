"""The torch-style front end: graph-building functions behind Tensor's methods."""
