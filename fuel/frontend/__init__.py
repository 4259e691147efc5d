"""The torch-style front end: the graph-building functions behind Tensor's methods, and the
method mixins (plus the module generated from the op registry) that ``fuel.tensor.Tensor``
is made of. Imports go one way: ``fuel.tensor`` imports the front end, never the reverse."""
