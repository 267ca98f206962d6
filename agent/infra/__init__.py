"""Infrastructure shared by the stages: waiting for dependencies, connecting to them."""
