"""The tools the chat model is offered, one module per family (memory, reminders)."""
