from .proxbox import *  # noqa: F403
