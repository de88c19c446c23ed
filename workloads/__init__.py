"""Workloads: task generators with their tools and verifiers (τ²-batch, BFCL parallel, wide/deep lookup).

Import direction: swarm ← tools ← workloads ← orchestrator (the CLI picks workloads by name).
"""
