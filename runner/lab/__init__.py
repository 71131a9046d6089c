"""The lab model: cluster.yaml's schema, plan expansion, the overnight schedule."""
