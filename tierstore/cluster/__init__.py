"""tierstore.cluster (extra ``cluster``): namespaces sharded over Ray actors,
with an S3 bucket as the system of record. See docs/cluster.md.

:class:`Cluster` offers :class:`tierstore.TierStore`'s API. Ray is imported
when a cluster is made, never at import; the embedded store never imports
this package.
"""

from tierstore.cluster.bucket import BucketConfig
from tierstore.cluster.cluster import Cluster
from tierstore.cluster.errors import ClusterError, DeadlineExceededError, FencedError, NotOwnerError

__all__ = ["BucketConfig", "Cluster", "ClusterError", "DeadlineExceededError", "FencedError", "NotOwnerError"]
