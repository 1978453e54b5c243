from .serializers_.projects import *  # noqa: F403
from .serializers_.publications import *  # noqa: F403
from .serializers_.revisions import *  # noqa: F403
