"""Everything that talks to a real Kubernetes API server (and Volcano when present).

`KubernetesBackend` is the gateway's Backend for one cluster; `render_gang` the pure
translation of a job into its objects; `GangBinder` Caldera's own gang placement.
"""

from k8s_bridge.backend import KubernetesBackend
from k8s_bridge.binder import GangBinder
from k8s_bridge.options import GangMode, K8sOptions, Toleration
from k8s_bridge.render import GangManifests, TranslationError, render_gang
from k8s_bridge.request import GangRequest

__all__ = [
    "GangBinder",
    "GangManifests",
    "GangMode",
    "GangRequest",
    "K8sOptions",
    "KubernetesBackend",
    "Toleration",
    "TranslationError",
    "render_gang",
]
