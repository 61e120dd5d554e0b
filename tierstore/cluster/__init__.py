"""tierstore.cluster: namespaces sharded over Ray actors, with an S3 bucket as the system of record."""
