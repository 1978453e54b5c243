import strawberry

from ..choices import ActivationPolicyChoices, RevisionStatusChoices, ScriptFileDiscoveryChoices

__all__ = ("ActivationPolicyEnum", "RevisionStatusEnum", "ScriptFileDiscoveryEnum")

ActivationPolicyEnum = strawberry.enum(ActivationPolicyChoices.as_enum(prefix="policy"))
RevisionStatusEnum = strawberry.enum(RevisionStatusChoices.as_enum(prefix="status"))
ScriptFileDiscoveryEnum = strawberry.enum(ScriptFileDiscoveryChoices.as_enum(prefix="discovery"))
