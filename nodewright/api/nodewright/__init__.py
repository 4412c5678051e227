"""CRD group package; versions live in subpackages."""
