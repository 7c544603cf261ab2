"""Test support shared by the tests beside the code and those in tests/: hypothesis generators and fuzz
input. Kept out of the production packages, whose installs have no hypothesis."""
