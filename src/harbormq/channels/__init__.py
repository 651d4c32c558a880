"""Channels: distributed queuing between queue managers (MQ's message channel
agents). ``protocol`` is the wire format, ``sync`` the synchronisation data
each side keeps on SYSTEM.CHANNEL.SYNCQ, ``sender`` and ``receiver`` the two
agents, ``initiator`` runs them and the listeners inside the queue manager's
process (docs/channels.md)."""
