module llmtrain

go 1.19
