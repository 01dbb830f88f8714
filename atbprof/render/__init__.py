"""Renderers: turn result objects into rich tables or JSON. They never compute figures themselves."""
