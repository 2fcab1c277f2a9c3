"""Sniper's wire vocabulary: feed events, decisions and the actors' protocol as msgspec structs."""
