"""tierstore.cluster (extra ``cluster``): namespaces sharded over Ray actors,
with an S3 bucket as the system of record. See docs/cluster.md.

:class:`Cluster` offers :class:`tierstore.TierStore`'s API. Ray is imported
when a cluster is made, never at import; the embedded store never imports
this package.
"""

from .bucket import BucketConfig
from .cluster import Cluster
from .errors import ClusterError, FencedError, NotOwnerError

__all__ = ["BucketConfig", "Cluster", "ClusterError", "FencedError", "NotOwnerError"]
