"""Next edit suggestions: the user's next change near the cursor, from the edits they just made."""
