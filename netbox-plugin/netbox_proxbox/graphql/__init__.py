from .inventory import InventoryQuery
from .schema import ProxboxQuery

schema = [ProxboxQuery, InventoryQuery]
