from .schema import ProxboxQuery

schema = [ProxboxQuery]
