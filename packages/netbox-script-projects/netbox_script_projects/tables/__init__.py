from .projects import *  # noqa: F403
