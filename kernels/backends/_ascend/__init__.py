"""The Ascend side: CANN builds and launches, and checks by Huawei's own compiler."""
