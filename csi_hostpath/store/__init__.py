"""Durable state (sqlite) and the files the controller shares with nodes through the pool."""
