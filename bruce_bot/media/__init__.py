"""Pictures, voice notes and documents: what a turn makes of the files people send.

Channel adapters only name a message's files (`domain.Attachment`, stored in the message's
`extra`); before the model is called, `preparation.MediaStep` fetches each one through the
channel that received it, reads it (images downscaled with Pillow, PDFs read with pypdf, audio
transcribed), records the outcome in the same `extra` (so a retried turn does not do it again)
and shows the model the result (`view.py`).
"""
