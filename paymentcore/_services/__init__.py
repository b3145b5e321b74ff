"""The services: what the core does, over the ports and the domain."""
