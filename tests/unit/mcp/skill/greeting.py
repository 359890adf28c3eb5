TEXT = "hello from the skill folder"
