"""Derivatives with respect to States."""
