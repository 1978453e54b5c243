from .assignment import *  # noqa: F403
from .inventory import *  # noqa: F403
from .proxbox import *  # noqa: F403
