"""The replication source: the connection (through the aiomysql seam), failover across hosts, the dump session
and the schema history's server lookups."""
