"""Proactive tasks: reminders (message mode) and briefings (agent mode) fired by APScheduler."""
