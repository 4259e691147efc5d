"""The torch-style front end: graph-building functions behind Tensor's methods.

``fuel.tensor`` defines Tensor and then installs these modules' methods on it, so it is
imported first, whichever module of the front end is imported first.
"""

import fuel.tensor  # noqa: F401
