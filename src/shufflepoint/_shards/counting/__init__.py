"""What a corpus counts of its samples once and keeps: tokens per document and shard (for ``Packed``),
where the counts live (published, or in a node's cache), how processes share the counting, bucket keys."""
