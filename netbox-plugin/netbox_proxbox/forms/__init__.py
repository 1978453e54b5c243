from .assignment import *  # noqa: F403
from .bulk_edit import *  # noqa: F403
from .bulk_import import *  # noqa: F403
from .filtersets import *  # noqa: F403
from .model_forms import *  # noqa: F403
