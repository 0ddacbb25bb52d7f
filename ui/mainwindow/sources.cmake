# mainwindow: sources (paths relative to ui/).
target_sources(stagecraft_ui PRIVATE
  mainwindow/MainWindow.h
  mainwindow/MainWindow.cpp
)
