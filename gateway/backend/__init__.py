"""The backend port: the core contract every adapter implements (gateway.model.backend) and
the optional capabilities resolved once per backend (capabilities)."""

from gateway.backend.capabilities import (
    AccountedJob,
    Accounting,
    Capabilities,
    Closes,
    EndsAttempts,
    JobControl,
    NativeDependencies,
    PlacesItself,
    Suspends,
    UpdatesTimeLimit,
    capabilities_of,
)

__all__ = [
    "AccountedJob",
    "Accounting",
    "Capabilities",
    "Closes",
    "EndsAttempts",
    "JobControl",
    "NativeDependencies",
    "PlacesItself",
    "Suspends",
    "UpdatesTimeLimit",
    "capabilities_of",
]
